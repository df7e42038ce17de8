"""Writing reference models the way the C++ loaders expect them."""

import os


def save_pretrained_clean(model, out):
    """save_pretrained into `out` (emptied first), keeping exactly
    config.json and model.safetensors, world-readable."""
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    model.save_pretrained(out)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    for f in os.listdir(out):
        os.chmod(os.path.join(out, f), 0o644)  # safetensors writes 0600
    files = sorted(os.listdir(out))
    assert files == ["config.json", "model.safetensors"], files
    return files
