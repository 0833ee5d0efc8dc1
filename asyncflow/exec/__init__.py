"""Executing compiled runs in this process: devices, plans, the executor, rendezvous, state.

trio, never HTTP. What a step goes through, in order: ``local_target`` (a Session's local
target) and ``compiled_run`` (the compile pipeline over ``compile/``, then one ``plan`` per
partition) make a ``CompiledRun``; its ``runner`` (the step runner) runs every partition
through ``dispatch`` (a plan's generated form from ``codegen``, else the ``core`` loop, with
``frames`` for control flow) under one ``step`` and one ``rendezvous`` (the Send/Recv table:
its interface and the local implementation). Kernels see a ``context``; they run on
``devices`` (CPU, and ``gpu`` through CuPy) with ``intra_op`` threads, yielding per
``timeslice``. Long-lived state: ``resources`` (variables), ``queues``, ``readers``, ``files``
(a worker's data directory). ``options`` holds SessionConfig, RunOptions and RunMetadata.
"""
