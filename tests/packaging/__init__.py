"""The distribution as PyPI and a user's pip meet it: sdist, wheel, a fresh venv."""
