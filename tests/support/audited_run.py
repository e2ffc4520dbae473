"""`python tests/support/audited_run.py REPORT rig ARGS...`: run the rig CLI and report what
the process that streams imported and drew, and when.

An audit hook (sys.addaudithook) sees every module the process loads and every subprocess
it starts; `Runner.run` is wrapped to mark the streaming phase and `rich.console.Console.render`
to count rendering calls. REPORT gets JSON: imports of rich/rig.dashboard modules with the
phase they happened in, render calls while streaming, the subprocesses started, the exit code.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PREFIXES = ("rig.dashboard", "rich")
report: dict[str, Any] = {"imports": [], "renders_streaming": 0, "subprocesses": []}
phase = ["before"]


def hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "import" and str(args[0]).startswith(PREFIXES):
        report["imports"].append([str(args[0]), phase[0]])
    elif event == "subprocess.Popen":
        report["subprocesses"].append([str(a) for a in (args[1] or [])])


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    sys.addaudithook(hook)
    import rich.console

    import rig.runs.runner

    run = rig.runs.runner.Runner.run

    async def marked(self: Any, specs: Any) -> Any:
        phase[0] = "streaming"
        try:
            return await run(self, specs)
        finally:
            phase[0] = "after"

    rig.runs.runner.Runner.run = marked  # type: ignore[method-assign]
    render = rich.console.Console.render

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        if phase[0] == "streaming":
            report["renders_streaming"] += 1
        return render(self, *a, **k)

    rich.console.Console.render = counted  # type: ignore[method-assign]
    from rig.cli import main as rig_main

    code = rig_main(argv[1:] if argv and argv[0] == "rig" else argv)
    report["exit"] = code
    with open(out, "w") as f:
        json.dump(report, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
