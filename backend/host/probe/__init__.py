"""The probe: one JSON answer per poll with each GPU, process, run, schedule, seat and disk
of the host (`main.py` assembles the parts beside it).

Standard library and `host/lib` only, Python 3.8+, like the rest of the host wing.
"""
