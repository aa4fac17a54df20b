"""Pictures of a batch (matplotlib) and the step-through viewer (``batchspec.viz.html``)."""
