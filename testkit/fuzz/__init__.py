"""A mutation fuzzer for the broker's wire protocol.

Real clients' requests (confluent-kafka and aiokafka sessions: admin, produce, group consume,
transactions), recorded once through a proxy into `corpus.bin` (`record.py`), are mutated
(`mutate.py`) and sent to a running broker over many connections (`run.py`), with a health check
every so many frames (`health.py`): the broker is alive, a produce/consume round trip works, the
records acknowledged before the fuzzing are unchanged, and its memory stays near idle.

    python bench/fuzz.py --frames 1000000 --seeds 1,2,3     # the long run, with figures
    python -m testkit.fuzz.record                           # record the corpus again
"""
