"""`goodput config show [--origin]`: prints what goodput.config_show renders for this invocation.

Kept out of workers/main.py so the parser there gains only the subcommand's lines.
"""

from __future__ import annotations

import argparse
import os

from goodput.config import Settings
from goodput.config_show import render
from goodput.config_sources import config_file, config_flag

# The global flags that set a key (workers.main.settings_from); subcommand flags do not apply here.
FLAG_KEYS = (("temporal", "temporal_address", "--temporal"), ("namespace", "namespace", "--namespace"))


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    flags = {key: flag for attr, key, flag in FLAG_KEYS if getattr(args, attr, None)}
    with config_flag(args.config):
        config = config_file()
    print(render(settings, flags=flags, environ=os.environ, config=config, origin=args.origin))
    return 0
