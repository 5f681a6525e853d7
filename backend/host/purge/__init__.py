"""The purge helper, run on the purged host: `main` answers the requests (the module the
controller sends), `paths` walks and pins, `facts` gathers, `verdict` judges (also imported by
the controller) and `remove` deletes. Standard library and `host/lib` only, Python 3.8."""
