"""A scripted draft: forces any acceptance pattern on a real target (Spec §5.2).

The bounded exhaustive check needs drafts whose acceptance it chooses. A
:class:`ScriptedDraft` wraps a real draft model: every forward call runs that
model, so the draft cache it fills is real and the invariants check real
tensors, but the logits are replaced by a one-hot on the scripted token. The
script of a request is the target's own greedy continuation of its prompt,
except at chosen generated indices (the *deviations*), where the draft
proposes a different token. With greedy acceptance (Spec §4.3.1) a row whose
first deviation in a round lies ``m`` drafts into the round accepts exactly
``m`` drafts.

The wrapper has to know which request each batch row serves, since rows leave
and move between rounds. The driver says so with :meth:`ScriptedDraft.follow`
before the prefill and before each round (a real draft reads it from its
input tokens; a script cannot); a call whose batch size differs from the rows
named is an error. Calls whose output the decoder never reads (prefill, and
a catch-up past the scripted horizon, Spec §4.2.1) keep the wrapped model's
own logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Script:
    """What the draft proposes for one request."""

    prompt_length: int
    continuation: list[int]  # the target's greedy continuation, generated index n -> token
    deviations: set[int] = field(default_factory=set)  # generated indices proposed wrongly

    def proposal(self, n: int, vocab: int) -> int | None:
        """Token proposed for generated index ``n``; ``None`` outside the script."""
        if not 0 <= n < len(self.continuation):
            return None
        token = self.continuation[n]
        return (token + 1) % vocab if n in self.deviations else token


class ScriptedDraft(torch.nn.Module):
    """A draft model with real KV cache and scripted proposals (see module doc).

    ``scripts`` maps a request id to its :class:`Script`; ``follow(requests)``
    names the request of each batch row for the calls that follow.
    """

    def __init__(self, model, scripts: dict[int, Script]):
        super().__init__()
        self.model = model
        self.scripts = scripts
        self.requests: list[int] = []
        self.vocab = model.get_output_embeddings().out_features
        self.train(model.training)  # a fresh Module is in training mode; the wrapper is as the model it wraps

    @property
    def config(self):
        return self.model.config

    @property
    def device(self):
        return self.model.device

    @property
    def dtype(self):
        return self.model.dtype

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def follow(self, requests: list[int]) -> None:
        """Rows ``0 .. B-1`` of the next calls serve ``requests``."""
        self.requests = list(requests)

    def forward(self, input_ids, attention_mask, position_ids, cache, use_cache=True, logits_to_keep=0):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         cache=cache, use_cache=use_cache, logits_to_keep=logits_to_keep)
        logits = out.logits  # [B, n, V] (the last n inputs)
        kept = position_ids[:, -logits.shape[1]:]  # [B, n] positions of those inputs
        scripted = logits.clone()
        if kept.shape[0] != len(self.requests):
            raise ValueError(f"follow() named {len(self.requests)} rows, the call has {kept.shape[0]}")
        for b, request in enumerate(self.requests):
            script = self.scripts[request]
            for t in range(kept.shape[1]):
                # the input at content position q predicts content token q + 1
                n = int(kept[b, t]) + 1 - script.prompt_length
                token = script.proposal(n, self.vocab)
                if token is not None:
                    scripted[b, t] = 0.0
                    scripted[b, t, token] = 1.0
        out.logits = scripted
        return out
