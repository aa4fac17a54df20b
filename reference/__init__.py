"""The reference implementation: EQSPEC on Hugging Face models (Spec §4).

Installed as ``batchspec.reference``. Cache access lives in :mod:`.cache`
only; the algorithm (:mod:`.eqspec`) yields an event after every step and
never times or prints.
"""

from .eqspec import STEPS, Event, RoundRecord, Steps, decode
from .observe import observation
from .steps import Models

__all__ = ["STEPS", "Steps", "Event", "Models", "RoundRecord", "decode", "observation"]
