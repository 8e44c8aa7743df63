"""Where a named ``--model`` comes from, and how each source spells it (torch-free: the CLI's parser reads it)."""

#: source → the ``--model`` spec of a name from it
SOURCES = {"zoo": "{}", "torchvision": "torchvision:{}", "timm": "timm:{}", "hf": "hf:{}"}
