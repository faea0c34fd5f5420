"""The three queue cores keep one written contract (dynoqueue/core/contract.py): every operation
of ``QueueOperations`` exists on QueueCore and PartitionedCore with the contract's parameters,
Discovering dispatches each one, and both façades call through it (mypy checks the types too,
core/layout.py)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from dynoqueue import DynoQueue, InvalidMessageError, QueuePolicy, SingleShardSupplier
from dynoqueue.asyncio import DynoQueue as AsyncDynoQueue
from dynoqueue.core import factory as factory_module
from dynoqueue.core.contract import OPERATIONS, QueueOperations
from dynoqueue.core.layout import Discovering, open_core
from dynoqueue.core.partitioned import PartitionedCore
from dynoqueue.core.queue import QueueCore
from dynoqueue.model.settings import QueueSettings


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter but self."""
    return [(p.name, p.kind, p.default)
            for p in inspect.signature(function).parameters.values() if p.name != "self"]


def test_the_operation_list_is_read_from_the_contract() -> None:
    declared = [name for name, value in vars(QueueOperations).items()
                if inspect.isfunction(value) and not name.startswith("_")]
    assert list(OPERATIONS) == declared
    assert len(OPERATIONS) >= 40 and len(set(OPERATIONS)) == len(OPERATIONS)


@pytest.mark.parametrize("core", [QueueCore, PartitionedCore])
@pytest.mark.parametrize("name", OPERATIONS)
def test_each_core_has_each_operation_with_the_contracts_parameters(core: type,
                                                                     name: str) -> None:
    contract = _parameters(getattr(QueueOperations, name))
    mine = _parameters(getattr(core, name))
    # A core may take more, optional, parameters after the contract's (QueueCore's
    # push_validated takes the shards a partitioned push chose).
    assert mine[:len(contract)] == contract
    assert all(p[2] is not inspect.Parameter.empty or p[1] is inspect.Parameter.VAR_KEYWORD
               for p in mine[len(contract):])


def test_discovering_dispatches_every_operation() -> None:
    settings = QueueSettings.build("contract", SingleShardSupplier("a"), cluster=False)
    core = open_core("q", settings, quorum_cluster=False, replica_reads=False, policy=None)
    assert isinstance(core, Discovering)
    for name in OPERATIONS:
        # Before the stored policy is read, an operation goes through the lookup first; push
        # is Discovering's own method, which checks the batch before the lookup.
        wrapper = getattr(core, name)
        assert wrapper.__name__ == ("push" if name == "push" else "<lambda>"), name
    batch_error = "push takes a list of Message"
    with pytest.raises(InvalidMessageError, match=batch_error):
        core.push("not a list")  # type: ignore[arg-type]
    assert core.found is None  # nothing was read: the error came first
    partitioned = open_core("q", settings, quorum_cluster=False, replica_reads=False,
                            policy=QueuePolicy(partitions=3))
    assert isinstance(partitioned, PartitionedCore)


@pytest.mark.parametrize("facade", [DynoQueue, AsyncDynoQueue])
def test_every_operation_is_reached_from_the_facades_or_the_factory(facade: type) -> None:
    """Each operation is called by a public method of each façade, or by the factory's passes
    (an operation nothing reaches is dead, or a façade method was forgotten)."""
    source = inspect.getsource(facade) + inspect.getsource(factory_module)
    missing = [name for name in OPERATIONS if f".{name}(" not in source]
    assert missing == []
