"""The install README.md gives: CI runs its test command verbatim, and no constraints file pins
what a clean machine cannot resolve. (`scripts/check_install.sh` resolves the install against
PyPI itself, as a clean machine does; CI runs it. These checks need no network.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kvfuzz import environment

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)

REPO = Path(__file__).resolve().parent.parent
CONSTRAINTS = sorted((REPO / "constraints").glob("*.txt"))


def readme_commands() -> list[str]:
    """The indented command lines of README's "Two commands on a fresh machine" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not a NAME==VERSION pin"
            out[name.strip().lower()] = version.strip()
    return out


def test_readme_gives_two_commands_and_ci_runs_the_test_command_verbatim():
    install_and_fuzz, install_and_test = readme_commands()
    assert install_and_fuzz.endswith("kvfuzz fuzz --budget 60 --report fuzz-report.json")
    assert install_and_test.endswith("python3 -m pytest -n auto")
    ci = (REPO / ".ci" / "run").read_text()
    assert install_and_test in ci, ".ci/run must run README's test command as README gives it"
    # both commands install torch and kvfuzz the same way; the test command adds the extras
    assert install_and_fuzz.split(" && kvfuzz fuzz")[0] == install_and_test.split(" && python3 -m pytest")[0] \
        .replace('-e ".[report,atheris]"', "-e .")


def test_readme_takes_the_cpu_torch_from_pytorchs_cpu_index_only_where_none_is_installed():
    for command in readme_commands():
        first = command.split(" && ")[0]
        assert first.startswith("python3 -c 'import torch' 2>/dev/null || python3 -m pip install torch==")
        assert first.endswith("--index-url https://download.pytorch.org/whl/cpu")
        assert "-c constraints/cpu.txt" in command


@pytest.mark.parametrize("path", CONSTRAINTS, ids=lambda p: p.name)
def test_a_constraints_file_pins_no_torch_and_only_what_kvfuzz_accepts(path):
    # torch comes from README's first step (a CPU wheel, which requires no triton) or is the one
    # present: a torch pin here would pull PyPI's CUDA build, which pins a triton of its own
    got = pins(path)
    assert "torch" not in got, f"{path.name} pins torch"
    assert {"triton", "numpy"} <= set(got)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    for req in wanted:
        if req.name.lower() in got:
            assert req.specifier.contains(got[req.name.lower()], prereleases=True), \
                f"{path.name} pins {req.name}=={got[req.name.lower()]}, outside kvfuzz's {req}"
    assert environment.untested_triton(got["triton"]) is None, f"{path.name}: triton {got['triton']} is untested"


def test_pyproject_puts_no_upper_bound_on_triton():
    # a CUDA torch pins its own triton; an upper bound would make kvfuzz uninstallable beside it
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    triton = next(Requirement(d) for d in deps if Requirement(d).name == "triton")
    assert not any(s.operator in ("<", "<=", "==", "~=") for s in triton.specifier), str(triton)


def test_the_test_command_leaves_the_slow_campaigns_to_an_opt_in():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["addopts"][:2] == ["-m", "not slow and not thorough"]
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"pytest -n auto -m slow", ci)
    # CI runs a shard of the thorough tests, chosen by the commit, out of six
    assert re.search(r'^KVFUZZ_THOROUGH_SHARD="\$shard/6" python3 -m pytest -n auto -m thorough$', ci, re.M)
    assert re.search(r"^shard=\$\(\( 16#\$\{commit:0:8\} % 6 \)\)$", ci, re.M)
