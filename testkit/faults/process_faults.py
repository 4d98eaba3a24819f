"""The faults done to a broker's process, the same whatever the broker: SIGSTOP / SIGCONT, SIGKILL,
and a start again on the same data. For a cluster whose `brokers` have `signal(sig)`, `kill()`,
`start()` and a `paused` flag (cluster.FaultCluster's logcore brokers, kraft.KraftFaultCluster's
Apache Kafka nodes)."""

from __future__ import annotations

import signal


class ProcessFaults:
    brokers: list

    def pause(self, broker_id: int) -> None:
        self.brokers[broker_id].signal(signal.SIGSTOP)
        self.brokers[broker_id].paused = True

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].signal(signal.SIGCONT)
        self.brokers[broker_id].paused = False

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()
        self.brokers[broker_id].start()
