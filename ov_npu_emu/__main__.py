"""``python -m ov_npu_emu`` runs the command line."""

from __future__ import annotations

import sys

from ov_npu_emu.cli import main

sys.exit(main())
