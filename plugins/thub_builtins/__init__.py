"""Built-in plugins: thub's own algorithms, reward functions and doctor checks.

They use exactly the hooks a third-party plugin uses (pytest's core-built-from-plugins).
"""
