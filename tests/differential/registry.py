"""The scenarios, by name: `@scenario` registers a function of a Side (side.py) that returns what
it observed. A scenario's topics and groups carry its name, so that all of them can share one
broker of each kind."""
SCENARIOS = {}
# Scenarios that change what the others rely on (deleting an internal topic), run after them.
LAST = set()
# Scenarios for the secured pair (SASL and ACLs: conftest.secure_brokers).
SECURE = set()
# Scenarios for the three-node pair (conftest.cluster_brokers): coordinators on other nodes.
CLUSTER = set()


def scenario(fn=None, *, last=False, secure=False, cluster=False):
    def register(fn):
        assert fn.__name__ not in SCENARIOS, f"two scenarios named {fn.__name__}"
        SCENARIOS[fn.__name__] = fn
        if last:
            LAST.add(fn.__name__)
        if secure:
            SECURE.add(fn.__name__)
        if cluster:
            CLUSTER.add(fn.__name__)
        return fn

    return register if fn is None else register(fn)


def in_order() -> list[str]:
    return sorted(SCENARIOS, key=lambda n: (n in LAST, n))
