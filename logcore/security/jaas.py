"""Kafka's JAAS lines, the way a broker's server.properties carries SASL users:

    listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \
        required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

`user_<name>="<password>"` options are the PLAIN users. Values are double-quoted (with \\" and \\\\
escapes) or bare words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..protocol.errors import InvalidConfig

_TOKEN = re.compile(r'\s*(?:(?P<word>[^\s=;"]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))'
                    r'|(?P<flag>[^\s=;"]+)|(?P<end>;))')
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class JaasEntry:
    module: str
    options: dict[str, str]

    @property
    def plain_users(self) -> dict[str, str]:
        return {key[5:]: value for key, value in self.options.items() if key.startswith("user_")}


def parse(setting: str, text: str) -> JaasEntry:
    """One login module entry: `module flag key="value" ...;`."""
    position, words, options, ended = 0, [], {}, False
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or ended:
            raise InvalidConfig(f"{setting}: cannot read the JAAS line at {text[position:position + 30]!r}; write "
                                f'{PLAIN_MODULE} required user_alice="alice-secret";')
        position = match.end()
        if match.group("end"):
            ended = True
        elif match.group("flag"):
            words.append(match.group("flag"))
        else:
            raw = match.group("quoted")
            options[match.group("word")] = (re.sub(r"\\(.)", r"\1", raw) if raw is not None else match.group("bare"))
    if len(words) != 2 or words[1] not in FLAGS:
        raise InvalidConfig(f"{setting}: a JAAS line is a login module, a flag ({', '.join(FLAGS)}) and options, "
                            f"ending in ';': got {text[:80]!r}")
    if not ended:
        raise InvalidConfig(f"{setting}: the JAAS line must end with ';'")
    return JaasEntry(words[0], options)
