"""The Ray session: start or join Ray, mute it, check the cluster, take signals, shut down.

* :mod:`.ray_session` -- init, muting, the address and cluster checks, shutdown;
* :mod:`.interrupts` -- SIGINT and SIGTERM on one path, and the commit point they respect;
* :mod:`.reaper` -- the watchdog that ends a Ray instance this process started.
"""
