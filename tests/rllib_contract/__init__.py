"""RLlib 2.60's OfflinePreLearner contract (conftest.py says how it runs).

A package, so that its conftest is imported as ``rllib_contract.conftest``, never as the top-level
``conftest`` the other test modules import from.
"""
