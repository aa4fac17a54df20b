"""A test's own record of every forward call (not batchspec's), and the first call in
which a planted bug's run differs from the correct run: where a check should fire."""

from __future__ import annotations

import torch


class Calls:
    """This test's own record of every forward call (not batchspec's): what was fed and returned."""

    def __init__(self, *models):
        self.models, self.calls, self.handles = models, [], []

    def __enter__(self):
        for name, model in zip(("target", "draft"), self.models):
            self.handles.append(model.register_forward_hook(self.hook(name), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()

    def hook(self, name):
        def record(_module, _args, kwargs, output):
            cache = kwargs.get("cache")
            self.calls.append((name, kwargs["input_ids"].clone(), _plain(kwargs.get("attention_mask")),
                               None if kwargs.get("position_ids") is None else kwargs["position_ids"].clone(),
                               output.logits.clone(), None if cache is None else cache.get_seq_length()))
        return record


def _plain(mask):
    return None if mask is None else mask.clone()


def same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and torch.equal(a, b)


def first_divergence(target, draft, correct, faulty) -> int:
    """The number (from 1) of the first call of ``faulty()`` that differs from ``correct()``'s
    (a faulty run that crashes is compared up to its crash)."""
    with Calls(target, draft) as good:
        correct()
    with Calls(target, draft) as bad:
        try:
            faulty()
        except RuntimeError:  # the shapes of a broken decoder stop adding up
            pass
    for n, (g, b) in enumerate(zip(good.calls, bad.calls), start=1):
        if g[0] != b[0] or g[5] != b[5] or not all(same(x, y) for x, y in zip(g[1:5], b[1:5])):
            return n
    raise AssertionError("the planted bug changed no call")
