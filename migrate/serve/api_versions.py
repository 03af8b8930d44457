"""ApiVersions (key 18), served in versions 0-4, flexible from 3 (ApiVersionsRequest.json, ApiVersionsResponse.json).

::

    ApiVersionsRequest   client_software_name => string (3+), client_software_version => string (3+)
    ApiVersionsResponse  error_code => int16
                         api_keys => [api_key => int16, min_version => int16, max_version => int16]
                         throttle_time_ms => int32 (1+)
                         tagged (3+): 0 supported_features => [name => string, min_version, max_version => int16]
                                      1 finalized_features_epoch => int64 (default -1)
                                      2 finalized_features => [name => string, max_version_level,
                                                               min_version_level => int16]
                                      3 zk_migration_ready => bool

A request of a version this endpoint does not serve is answered as Kafka answers it (KIP-511): a version 0 response
with UNSUPPORTED_VERSION and the versions it does serve, so the client retries with one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrate.serve.wire import Api, Versions, array, boolean, int16, int32, int64, string


@dataclass
class ApiVersionsRequest:
    client_software_name: str = string("3+")
    client_software_version: str = string("3+")


@dataclass
class ApiVersion:
    api_key: int = int16("0+")
    min_version: int = int16("0+")
    max_version: int = int16("0+")


@dataclass
class SupportedFeatureKey:
    name: str = string("3+")
    min_version: int = int16("3+")
    max_version: int = int16("3+")


@dataclass
class FinalizedFeatureKey:
    name: str = string("3+")
    max_version_level: int = int16("3+")
    min_version_level: int = int16("3+")


@dataclass
class ApiVersionsResponse:
    error_code: int = int16("0+")
    api_keys: list[ApiVersion] = array(ApiVersion, "0+")
    throttle_time_ms: int = int32("1+")
    supported_features: list[SupportedFeatureKey] = array(SupportedFeatureKey, "3+", tag=0)
    finalized_features_epoch: int = int64("3+", -1, tag=1)
    finalized_features: list[FinalizedFeatureKey] = array(FinalizedFeatureKey, "3+", tag=2)
    zk_migration_ready: bool = boolean("3+", tag=3)


API = Api(18, "ApiVersions", ApiVersionsRequest, ApiVersionsResponse, Versions.parse("0-4"), Versions.parse("3+"))
