"""The ternforge server: ships inside the submission directory and runs where only Python exists."""
