import pytest

from broker import Broker


@pytest.fixture
def make_broker(tmp_path):
    """Factory for brokers on free ports; every broker is stopped and checked for panics."""
    brokers = []

    def make(shards: int = 2, **kwargs) -> Broker:
        b = Broker(tmp_path / f"data-{len(brokers)}", shards=shards, **kwargs)
        brokers.append(b)
        return b.start()

    yield make
    # Every broker is killed before any is checked, so a failed check leaves none running.
    for b in brokers:
        b.kill()
    for b in brokers:
        b.assert_no_panic()


@pytest.fixture
def broker(make_broker) -> Broker:
    return make_broker()
