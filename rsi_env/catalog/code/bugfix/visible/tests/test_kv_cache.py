"""Unit tests of the block pool (kv_cache.py). Run: python -m pytest -q tests/"""

from kv_cache import BlockPool


def test_take_and_release_return_every_block():
    pool = BlockPool(32)
    pool.take(5)
    assert pool.num_free == 27 and pool.used == 5
    pool.release(5)
    assert pool.num_free == 32
    pool.check()


def test_a_shared_prefix_becomes_evictable_when_its_last_user_leaves():
    pool = BlockPool(16)
    pool.take(4)
    pool.acquire(0)
    pool.extend(0, 4)
    pool.acquire(0)
    pool.unacquire(0)
    assert pool.evictable == 0  # one user left
    pool.unacquire(0)
    assert pool.evictable == 4 and pool.num_free == 16
    pool.check()


def test_allocation_evicts_cached_blocks_when_plain_ones_run_out():
    pool = BlockPool(8)
    pool.take(8)
    pool.park(100, 8)
    assert pool.num_free == 8
    pool.take(8)
    assert pool.evictions == 8 and pool.num_free == 0
    pool.check()
