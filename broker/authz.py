"""Who may call what on a broker's gRPC port (checked by the one interceptor of
autoswitch.base.auth; the HA port checks its peers itself, ha/ has no gRPC; the fetch port,
broker/fetch_server.py, checks every FETCH against the ``Consume`` rule):

    Produce                         producer
    Consume, LogDigest, LogRanges   reader
    GetBrokerEpoch, GetStatus       reader, or any broker (replicas ask each other)
    SwitchRole                      admin (static-role mode; the controller decides otherwise)
    TransferMaster                  admin; peer: only the controller this broker hears as the Raft leader
                                    (the handler checks it: service.transfer_refusal)
    CommitOffset, FetchOffset,      reader (a consumer commits its group's progress)
      ConsumerProgress
    DeleteConsumerGroup             admin
    UpdateTopic, DeleteTopic        admin
    GetBrokerConfig                 reader
    UpdateBrokerConfig              admin
"""

from __future__ import annotations

from autoswitch.base.auth import Role, Rule

BROKER_RULES: dict[str, Rule] = {
    "Produce": Rule((Role.PRODUCER,)),
    "Consume": Rule((Role.READER,)),
    "LogDigest": Rule((Role.READER,)),
    "LogRanges": Rule((Role.READER,)),
    "GetBrokerEpoch": Rule((Role.READER, Role.BROKER)),
    "GetStatus": Rule((Role.READER, Role.BROKER)),
    "SwitchRole": Rule((Role.ADMIN,)),
    "TransferMaster": Rule((Role.ADMIN, Role.PEER)),
    "CommitOffset": Rule((Role.READER,)),
    "FetchOffset": Rule((Role.READER,)),
    "ConsumerProgress": Rule((Role.READER,)),
    "ListClients": Rule((Role.READER,)),
    "ListTopics": Rule((Role.READER,)),
    "DeleteConsumerGroup": Rule((Role.ADMIN,)),
    "UpdateTopic": Rule((Role.ADMIN,)),
    "DeleteTopic": Rule((Role.ADMIN,)),
    "GetBrokerConfig": Rule((Role.READER,)),
    "UpdateBrokerConfig": Rule((Role.ADMIN,)),
    # grpc.health.v1.Health: any caller the broker knows
    "Check": Rule(tuple(Role)),
    "Watch": Rule(tuple(Role)),
}
