"""ApiVersions (key 18), v0-4 (v4 differs from v3 only in allowing feature min version 0, KAFKA-17011).

From v3 the response carries Kafka's feature flags (KIP-584), as a Kafka 4.0 node
answers them (Admin's describeFeatures, ``kafka-features.sh describe``): the features
Chronolog has and the levels it runs at, which never change (no UpdateFeatures), so
their epoch is 0:

- ``metadata.version`` 7-25 (3.3-IV3 to 4.0-IV3), finalized at 25;
- ``group.version`` 0-1, finalized at 1 (KIP-848's consumer group protocol);
- ``eligible.leader.replicas.version`` 0-1, finalized at 1 (ELR on, as a 4.1 cluster);
- ``share.version`` 0-1, finalized at 1 (KIP-932's share groups);
- ``transaction.version`` 0-1, not finalized (level 0): transactions V1, so producers do
  not take V2's epoch bump per transaction, which Chronolog does not offer.

As Kafka (KAFKA-17492), a v3 response leaves out the supported features whose minimum is
0 (older clients cannot read them); finalized features at level 0 are never listed.
Debian's kcat (librdkafka 2.0) reads these responses.
"""

from protocol.messages import ApiVersionsResponse as R

#: name -> (min supported, max supported, finalized level)
FEATURES = {
    "metadata.version": (7, 25, 25),
    "group.version": (0, 1, 1),
    "eligible.leader.replicas.version": (0, 1, 1),
    "share.version": (0, 1, 1),
    "transaction.version": (0, 1, 0),
}
FINALIZED_EPOCH = 0


def handle(ctx, header, request):
    from broker.dispatcher import api_version_entries

    v3 = header.api_version < 4
    return R(error_code=0, api_keys=api_version_entries(), throttle_time_ms=0,
             supported_features=[R.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                                 for n, (lo, hi, _f) in FEATURES.items() if not (v3 and lo == 0)],
             finalized_features_epoch=FINALIZED_EPOCH,
             finalized_features=[R.FinalizedFeatureKey(name=n, max_version_level=f, min_version_level=f)
                                 for n, (_lo, _hi, f) in FEATURES.items() if f],
             zk_migration_ready=False)
