"""What a run writes: the contract of file names and columns (``files``), the recorder that
writes them as the run goes (``recorder``), and how a summary measures the recovery after a
change of the population (``recovery``). ``analysis/`` reads ``files`` and ``recovery`` only.

Nothing is imported here, so that reading the contract pulls in neither simpy nor torch.
"""
