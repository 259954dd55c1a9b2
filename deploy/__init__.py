"""Deployment: the ahead-of-time op wheel (setup.py), model export and the C++ runner."""
