"""The request context and services as the handlers see them: with this broker's group and
transaction coordinators, the layer below the handlers."""

from __future__ import annotations

from typing import TypeAlias

from raftka.broker.groups import GroupCoordinator
from raftka.broker.services import ApiEndpoint as _ApiEndpoint
from raftka.broker.services import BrokerServices as _BrokerServices
from raftka.broker.services import RequestContext as _RequestContext
from raftka.broker.txn import TransactionCoordinator

BrokerServices: TypeAlias = _BrokerServices[GroupCoordinator, TransactionCoordinator]
RequestContext: TypeAlias = _RequestContext[GroupCoordinator, TransactionCoordinator]
ApiEndpoint: TypeAlias = _ApiEndpoint[GroupCoordinator, TransactionCoordinator]
