"""How the doc-block collector reads a page: languages, markers and shell commands."""

from __future__ import annotations

from pathlib import Path

import doc_blocks
from doc_blocks import blocks_of

PAGE = """# A page

<!-- docs-test: skip needs a Databricks workspace -->
```sh
airo list --profile prod \\
    --limit 5   # newest first
# a comment line
airo get 1
```

```python
print("runs")
```

```text
not code
```

<!-- docs-test: script tests/x.py -->
```bash
echo hi
```

```yaml
a: 1
```
"""


def test_blocks_markers_and_commands(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(doc_blocks, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = blocks_of(page)
    assert [(b.language, b.marker, b.detail) for b in blocks] == [
        ("sh", "skip", "needs a Databricks workspace"),
        ("python", None, ""),
        ("bash", "script", "tests/x.py"),
        ("yaml", None, ""),
    ]
    assert blocks[0].commands == [
        "airo list --profile prod --limit 5   # newest first",
        "airo get 1",
    ]
    assert blocks[1].id == "page.md:11-python"
