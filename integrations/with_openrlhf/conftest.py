"""vLLM has no CPU build that installs here: put the import stub (vllm_stub/) on the path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "vllm_stub"))
