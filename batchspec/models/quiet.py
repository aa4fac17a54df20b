"""Loading weights without transformers' progress bars.

transformers draws a ``Loading weights: 100%|...|`` bar on standard error for
every model it loads. In library use (a script, a notebook, the docs build)
loading the default pair is instant and the bars are only noise, so the
loaders of :mod:`batchspec.models` switch them off while they load and put
the caller's setting back afterwards.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def no_progress_bars():
    """Within the block, transformers (and huggingface_hub) draw no progress bars."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()
