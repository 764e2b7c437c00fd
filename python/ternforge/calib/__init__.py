"""fetch-calib: declared text sources -> token files and the data manifest (see fetch.py)."""
