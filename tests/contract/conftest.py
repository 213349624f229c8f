"""Makes the contract cases importable as ``collective_cases`` (also inside launched ranks)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
