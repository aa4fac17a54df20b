"""A conformance command: the vector's prompts, left-padded, through transformers'
``generate`` with batchspec's ``custom_generate`` folder; prints the answer as JSON."""

import json
import sys
from pathlib import Path

import torch

from batchspec import hf
from batchspec.conformance.run import load_vector, models

path = Path(sys.argv[1])
vector = load_vector(path)
target, draft = models(path.parent, vector)
prompts, eos = vector["prompts"], vector["eos_token_id"]
width = max(map(len, prompts))
ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
target.generation_config.eos_token_id = eos or None  # an empty list: no EOS, not the model's default
out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=draft, custom_generate=hf.HUB,
                      trust_remote_code=True, num_assistant_tokens=vector["k"], assistant_confidence_threshold=0,
                      max_new_tokens=vector["max_new_tokens"], pad_token_id=0)
rows = out[:, width:].tolist()
print(json.dumps({"sequences": [next((r[:i + 1] for i, t in enumerate(r) if t in eos), r) for r in rows]}))
