"""A conformance command: reads the vector path, prints the answer as JSON (batchspec's own EQSPEC)."""

import json
import sys
from pathlib import Path

from batchspec.conformance.run import load_vector, models, reference_decoder

path = Path(sys.argv[1])
vector = load_vector(path)
target, draft = models(path.parent, vector)
print(json.dumps(reference_decoder(target, draft, vector["prompts"], vector["k"], vector["max_new_tokens"],
                                   vector["eos_token_id"])))
