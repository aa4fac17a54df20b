"""The reference implementation: EQSPEC on Hugging Face models (Spec §4).

Installed as ``batchspec.reference``. Cache access lives in :mod:`.storage`
(the layer-stacked cache), :mod:`.moves` (realignment), :mod:`.rows`
(EXSPEC's per-row storage) and :mod:`.model_call` (the forward call) only;
the algorithm (:mod:`.eqspec`) yields an event after every step and
never times or prints.
"""

from .eqspec import STEPS, Event, RoundRecord, Steps, decode
from .observe import observation
from .transitions import Models

__all__ = ["STEPS", "Steps", "Event", "Models", "RoundRecord", "decode", "observation"]
