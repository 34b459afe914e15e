"""The runtime: where each part runs, what it alone owns, and the one way others reach it.

    user process
      caller threads      runs   _facade.py (Scheduler), ../_api.py, ../_validate.py, _durable/_recovery.py,
                                 _durable/_down.py
                          owns   task and request numbers (under the Scheduler's lock)
                          via    - (they call the others)
      listener thread     runs   _listener.py, ../_failure_log.py
                          owns   the handles' state, the requests waiting for an answer, the listeners' calls,
                                 the bursts of failed runs being logged
                          via    the event stream: backend.next_batch() (the event pipe; threads, Ray: a queue)
    dispatcher process (python -m procsched._runtime._dispatcher)
      its loop            runs   _dispatcher.py, _boot.py (its first steps), _engine.py, _handoff.py, _holds.py,
                                 _run_requests.py,
                                 ../_core/, _process_carrier.py, _gc.py, _durable/_journal.py,
                                 _durable/_peers.py, _durable/_requests.py
                          owns   the engine (the core, the pool's slots, every run's fate), the workers' pipes
                                 and sentinels, the store's dispatcher connection
                          via    one select(): the command pipe (commands), each worker's pipe (its reports)
                                 and sentinel, its wake-up pipe (signals), the store writer's pipe
      store writer        runs   _durable/_writer.py
                          owns   its own store connection, the batch being committed
                          via    Writer.submit (a queue); it answers on a pipe the loop selects on
    forkserver            runs   _boot.py (it is forked there), _forkserver.py
                          owns   the workers' parentage (their process groups end with it)
                          via    multiprocessing's socket (ProcessCarrier.spawn)
    worker processes      runs   _worker_main.py, _worker.py, _wire.py, ../_context.py
                          owns   the run in progress: user code is unpickled and run only here
                          via    its duplex pipe (RunOrder in, reports out) and its ticket pipe (a byte a run)
    threads runner        runs   _dispatch_thread.py (the loop) and _threads.py (the carrier, the worker threads)
                          owns   the engine, as the dispatcher's loop does
                          via    its inbox (a queue); each worker thread: its own queue
    Ray runner            runs   _dispatch_thread.py and _ray.py in the user process; _ray_task.py on the cluster
                          owns   the engine, as above; Ray places the runs
                          via    its inbox; runs: Ray tasks (_ray_task.run) and the Mailbox actor

Between them: every command, order, report and event is a record of
``_messages.py`` (a plain tuple on the wire); user code crosses as opaque
bytes (``_wire.py``). The engine asks its runtime through
``_carrier.Carrier`` and a store through ``_store_hooks.Durable``; a task's
slots are the core's ``Schedule``'s to answer.

This package imports nothing at import: the dispatcher and the workers are
fresh interpreters that import only the modules they run.
"""
