"""The docs-as-tests convention (tests/docs/doc_steps.py) read from small Markdown samples."""

from __future__ import annotations

import re

import pytest

from doc_steps import DocError, after, steps
from test_docs import shows

SAMPLE = '''# A doc
<!-- doctest: after docs/quickstart.md -->

```sh synopsis
tool run CONFIG.yaml [--flag]
```

```sh background until="ready on"
server --port 1
```

```sh
echo one \\
  two
mysql -e "
  SELECT 1;
  SELECT 2"
cat > f <<'YAML'
a: "unclosed
YAML
```

```text output
two
```

```sh slow
pyspark
>>> spark.range(1).show()
>>> exit()
```

```text output
| id|
```

```yaml
not: run
```
'''


def test_blocks_become_steps_as_the_convention_says(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(SAMPLE)
    found = steps(doc, "doc.md")
    assert [(s.kind, s.line) for s in found] == [("background", 9), ("run", 13), ("run", 15), ("run", 18),
                                                 ("output", 23), ("run", 28), ("output", 33)]
    assert found[0].until == "ready on" and found[1].text == "echo one \\\n  two"
    assert found[2].text.endswith('SELECT 2"') and found[3].text.endswith("YAML")
    assert found[5].slow and found[5].typed == "spark.range(1).show()\nexit()\n"
    assert found[6].slow, "an output block follows its command into the slow variant"
    assert after(doc) == "docs/quickstart.md"


@pytest.mark.parametrize("block, problem", [
    ('```sh backgrond until="x"\nserver\n```', "unknown label(s) ['backgrond']"),
    ("```sh background\nserver\n```", 'a background block needs until="..."'),
    ("```text output\nx\n```", "an output block must follow a block of commands to run"),
    ("```sh\necho\n", "a code block that never ends"),
])
def test_a_block_that_breaks_the_convention_is_named(tmp_path, block, problem):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# A doc\n\n{block}\n")
    with pytest.raises(DocError, match=re.escape(f"doc.md:3: ") + ".*" + re.escape(problem)):
        steps(doc, "doc.md")


def test_output_lines_are_found_in_order_whitespace_collapsed():
    printed = "+---+\n|  1|Ada Lovelace|  gold|\n|  2| Alan Turing| basic|\n(2 rows)"
    assert shows(printed, "| 1|Ada Lovelace| gold|\n(2 rows)")
    assert not shows(printed, "(2 rows)\n| 1|Ada Lovelace| gold|")  # out of order
    assert not shows(printed, "| 3|")
