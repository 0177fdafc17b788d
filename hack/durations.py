"""Write tests/durations.json from a pytest JUnit report: `{node id: seconds}` for the tests of a second or
more (setup + call + teardown, as the report gives), rounded to 0.1 s. Used by tests/harness/ordering.py to
hand the longest tests out first.

    python hack/durations.py [--out tests/durations.json] tmp/junit.xml [more.xml ...]

With several reports, a test's duration is the longest it took in any of them.
"""

from __future__ import annotations

import json
import pathlib
import sys
import xml.etree.ElementTree as ET

MIN_S = 1.0


def node_id(case: ET.Element) -> str:
    """pytest's node id of a JUnit test case (`tests/test_x.py::test_name[param]`)."""
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = classname.split(".")
    # "tests.test_x" -> tests/test_x.py ; "tests.test_x.TestClass" -> tests/test_x.py::TestClass
    for cut in range(len(parts), 0, -1):
        path = pathlib.Path(*parts[:cut]).with_suffix(".py")
        if path.exists():
            return "::".join([str(path), *parts[cut:], name])
    return f"{classname}::{name}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = pathlib.Path("tests/durations.json")
    if argv[0] == "--out":
        out, argv = pathlib.Path(argv[1]), argv[2:]
    times: dict[str, float] = {}
    for path in argv:
        for case in ET.parse(path).getroot().iter("testcase"):
            if case.get("classname"):  # a report's case without one is not a test (an internal error)
                key = node_id(case)
                times[key] = max(times.get(key, 0.0), round(float(case.get("time", 0)), 1))
    kept = dict(sorted(((k, v) for k, v in times.items() if v >= MIN_S), key=lambda kv: (-kv[1], kv[0])))
    out.write_text(json.dumps(kept, indent=1) + "\n")
    print(f"{out}: {len(kept)} of {len(times)} tests take {MIN_S:.0f} s or more; {sum(kept.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
