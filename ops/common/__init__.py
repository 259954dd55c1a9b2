"""What the ops share: C++ headers (checks, launch configuration, vector loads, the
elementwise host side) and ``pointwise.py``, the Python surface of the elementwise ops."""
