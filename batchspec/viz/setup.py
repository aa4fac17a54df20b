"""The first cell of every tutorial: which pair, which device, which prompts.

``BATCHSPEC_TUTORIAL_PAIR`` (default ``"default"``, any name of
``batchspec models list``) and ``BATCHSPEC_TUTORIAL_DEVICE`` (default
``"cpu"``) choose them, and ``BATCHSPEC_TUTORIAL_DTYPE`` (default
``"float64"``) the precision of a tutorial that does not fix its own, so the
same notebook runs on a real pair on a GPU unchanged, or in float32 where a
real pair in float64 would not fit in memory. When the pair or the device
is not available here, the setup says so and falls back to the embedded default pair on CPU, so that every
line of the notebook still runs.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..models import registry

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Prompts for a pair with a real tokenizer (the default and tiny pairs bring their own).
CODE_PROMPTS = ["def fibonacci(n):\n    ", "import os\n\nfor name in os.listdir(", "class Stack:\n    def push(self, x):",
                "# sum a list\ntotal = 0\nfor x in", "def is_prime(n):\n    if n < 2:\n        return",
                "with open(path) as f:\n    for line in", "numbers = [1, 2, 3]\nsquares = [", "try:\n    value = int(text)\n"]


def prompts_for(pair: str, count: int, seed: int = 0, tokenizer=None) -> list[list[int]]:
    """``count`` prompts (token ids) that suit ``pair``'s vocabulary.

    default: held-out stdlib source of 24 to 96 bytes (ragged from round 1);
    tiny pairs: random ids 2..95 (0 is their pad id, 1 their EOS); a pair
    with a tokenizer: :data:`CODE_PROMPTS` encoded.
    """
    if pair == "default":
        from ..demo_pair import demo_prompts

        return demo_prompts(count)
    if pair.startswith("tiny-"):
        rng = random.Random(seed)
        return [[rng.randrange(2, 96) for _ in range(rng.randint(2, 12))] for _ in range(count)]
    if tokenizer is None:
        raise ValueError(f"pair {pair!r} has no tokenizer to make prompts with")
    return [list(tokenizer.encode(CODE_PROMPTS[i % len(CODE_PROMPTS)])) for i in range(count)]


@dataclass
class TutorialSetup:
    """What a tutorial runs on. ``note`` says what was asked and what runs."""

    pair: str
    requested_pair: str
    device: str
    requested_device: str
    dtype: torch.dtype
    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: registry.Tokenizer | None
    eos_token_id: int | None
    note: str

    @property
    def alphabet(self) -> str | None:
        """``"bytes"`` when token ids are bytes (the default pair), for the pictures."""
        return "bytes" if self.pair == "default" else None

    @property
    def fell_back(self) -> bool:
        """True when the requested pair or device was not available here."""
        return (self.pair, self.device) != (self.requested_pair, self.requested_device)

    def prompts(self, count: int, seed: int = 0) -> list[list[int]]:
        """See :func:`prompts_for`."""
        return prompts_for(self.pair, count, seed, self.tokenizer)

    def text(self, ids) -> str:
        """Token ids as text (their ids joined when the pair has no tokenizer)."""
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(list(ids))


def _device_problem(device: str) -> str | None:
    if device.startswith("cuda") and not torch.cuda.is_available():
        return f"device {device!r} is not available here (torch.cuda.is_available() is False)"
    return None


def asked_for(pair: str | None = None, device: str | None = None) -> tuple[str, str]:
    """``(pair, device)`` asked for: the arguments, else ``BATCHSPEC_TUTORIAL_PAIR`` and
    ``BATCHSPEC_TUTORIAL_DEVICE``, else the default pair on CPU."""
    return (pair or os.environ.get("BATCHSPEC_TUTORIAL_PAIR") or "default",
            device or os.environ.get("BATCHSPEC_TUTORIAL_DEVICE") or "cpu")


def asked_dtype() -> torch.dtype:
    """The precision ``BATCHSPEC_TUTORIAL_DTYPE`` asks for (default float64); a
    name outside :data:`~batchspec.models.registry.DTYPES` is refused before any model loads."""
    name = os.environ.get("BATCHSPEC_TUTORIAL_DTYPE") or "float64"
    if name not in registry.DTYPES:
        raise ValueError(f"BATCHSPEC_TUTORIAL_DTYPE={name!r} is not a precision batchspec knows "
                         f"(one of {', '.join(registry.DTYPES)})")
    return registry.DTYPES[name]


def chosen_pair(pair: str | None = None, device: str | None = None, fallback: str = "default"
                ) -> tuple[str, str, list[str]]:
    """``(pair, device, problems)`` a tutorial runs on: what was asked (:func:`asked_for`)
    when it is available here, else ``fallback`` on CPU, with the reasons in ``problems``.

    Only the arguments and the environment choose: a real pair that happens to
    be fetched or cached here is never taken unasked, so the test suite and the
    docs build run on the pair they were told to use.
    """
    asked_pair, asked_device = asked_for(pair, device)
    problems = []
    if asked_pair not in registry.PAIRS:
        problems.append(f"pair {asked_pair!r} is unknown (known: {', '.join(registry.PAIRS)})")
    else:
        available, reason = registry.availability(asked_pair)
        if not available:
            problems.append(f"pair {asked_pair!r} is {reason}")
    problem = _device_problem(asked_device)
    if problem:
        problems.append(problem)
    run_pair = fallback if problems and any("pair" in p for p in problems) else asked_pair
    return run_pair, "cpu" if problem else asked_device, problems


def tutorial_setup(dtype: torch.dtype | None = None, pair: str | None = None, device: str | None = None,
                   fallback: str = "default", quiet: bool = False) -> TutorialSetup:
    """Load the tutorial's pair on its device (:func:`chosen_pair`: the arguments, else
    the environment variables, else the default pair on CPU).

    ``dtype``: the argument, else ``BATCHSPEC_TUTORIAL_DTYPE``
    (:func:`asked_dtype`), else float64: the tutorials' exactness claims are
    claims about the algorithm, which float64 keeps free of rounding ties
    (Spec §5.2). Prints one line saying what runs (unless ``quiet``).
    """
    dtype = dtype or asked_dtype()
    asked_pair, asked_device = asked_for(pair, device)
    run_pair, run_device, problems = chosen_pair(asked_pair, asked_device, fallback)
    target, draft, tokenizer = registry.load_pair(run_pair, dtype=dtype, device=run_device)
    eos = None
    if run_pair == "default":
        from ..models import bytes as byte_codec

        eos = byte_codec.EOS_TOKEN_ID
    elif tokenizer is not None:
        eos = getattr(tokenizer, "eos_token_id", None)
    note = f"running on pair {run_pair!r}, device {run_device!r}, {str(dtype).replace('torch.', '')}"
    if problems:
        note = "; ".join(problems) + f" -> {note} instead"
    if not quiet:
        print(note)
    return TutorialSetup(run_pair, asked_pair, run_device, asked_device, dtype, target, draft, tokenizer, eos, note)
