"""ternforge workers: the tensor math the TypeScript pipeline calls as `python -m ternforge <command>`."""
