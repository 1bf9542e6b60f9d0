"""The demo's outside world as one real HTTP service, in its own process with its own database.

It holds the image renderer, the asset store, the publishing platform and the card processor
the demo pipeline reaches with its HTTP tools (demo/pipeline.py), behind JSON endpoints served
by gunicorn. Resumer reaches it only over HTTP, so a request that was
committed here and whose answer was lost is a real event, not a simulation. Faults are armed
per named call through /_faults; `python -m demo_service` runs it, demo_service.process
starts and stops it for tests.
"""
