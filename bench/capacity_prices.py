"""The prices and quotas the capacity model uses, each with where it was read and when.

us-east-1 list prices as published in 2026-12 on the AWS pricing pages named in ``source`` (the Lambda, API
Gateway, DynamoDB, ElastiCache, EventBridge, SQS and VPC pricing pages: the figures the project's FACTS brief lists
as checked). Figures marked ``verified=False`` were read from secondary sources (a third-party page quoting the AWS
page, or AWS documentation without the price table) and are stated as such wherever they are printed. Every
price can be replaced on the command line (``--price lambda_gb_s_arm64=0.0000133334``), for another region or a
later price list.
"""

from __future__ import annotations

from dataclasses import dataclass

AS_OF = "2026-12"


@dataclass(frozen=True)
class Price:
    value: float
    unit: str
    source: str
    verified: bool = True


PRICES: dict[str, Price] = {
    "lambda_gb_s_arm64": Price(0.0000133334, "USD per GB-second (arm64)", "AWS Lambda pricing"),
    "lambda_gb_s_x86": Price(0.0000166667, "USD per GB-second (x86)", "AWS Lambda pricing"),
    "lambda_request": Price(0.20 / 1e6, "USD per request", "AWS Lambda pricing"),
    "apigw_rest_request": Price(3.50 / 1e6, "USD per request (REST API, first tier)", "Amazon API Gateway pricing"),
    "dynamodb_wru": Price(0.625 / 1e6, "USD per write request unit (on-demand)", "Amazon DynamoDB pricing"),
    "dynamodb_rru": Price(0.125 / 1e6, "USD per read request unit (on-demand)", "Amazon DynamoDB pricing"),
    "dynamodb_storage_gb_month": Price(
        0.25, "USD per GB-month (standard table class)", "Amazon DynamoDB pricing, via secondary sources", False
    ),
    "elasticache_gb_hour": Price(
        0.084, "USD per GB-hour of data stored (Serverless Valkey, 100 MB minimum)", "Amazon ElastiCache pricing"
    ),
    "elasticache_ecpu": Price(0.0023 / 1e6, "USD per ECPU (Serverless Valkey)", "Amazon ElastiCache pricing"),
    "eventbridge_event": Price(1.00 / 1e6, "USD per custom event published", "Amazon EventBridge pricing"),
    "sqs_request": Price(0.40 / 1e6, "USD per request (standard queue)", "Amazon SQS pricing"),
    "nat_gb": Price(0.045, "USD per GB processed", "Amazon VPC pricing (NAT gateway)"),
    "nat_hour": Price(0.045, "USD per NAT gateway-hour", "Amazon VPC pricing (NAT gateway)"),
    "interface_endpoint_hour": Price(
        0.01, "USD per interface endpoint per AZ-hour", "AWS PrivateLink pricing, via an AWS sample's cost model", False
    ),
    "agentcore_vcpu_hour": Price(
        0.0895, "USD per vCPU-hour (active CPU only)",
        "Amazon Bedrock AgentCore pricing (v1 rate), via third-party pages and AWS's agent-toolkit docs", False,
    ),
    "agentcore_gb_hour": Price(
        0.00945, "USD per GB-hour (peak memory, idle included)",
        "Amazon Bedrock AgentCore pricing (v1 rate), via third-party pages and AWS's agent-toolkit docs", False,
    ),
    "fargate_vcpu_hour_arm64": Price(
        0.03238, "USD per vCPU-hour (Linux/ARM)", "AWS Fargate pricing, via third-party pages quoting it", False
    ),
    "fargate_gb_hour_arm64": Price(
        0.00356, "USD per GB-hour (Linux/ARM)", "AWS Fargate pricing, via third-party pages quoting it", False
    ),
    "alb_hour": Price(0.0225, "USD per ALB-hour", "Elastic Load Balancing pricing (transcribed 2026-09-20)", False),
    "alb_lcu_hour": Price(0.008, "USD per LCU-hour", "Elastic Load Balancing pricing (transcribed 2026-09-20)", False),
}


@dataclass(frozen=True)
class Quota:
    value: float
    unit: str
    source: str
    adjustable: bool = True
    verified: bool = True


QUOTAS: dict[str, Quota] = {
    "lambda_concurrency": Quota(1_000, "concurrent executions per region (account)", "AWS Lambda quotas"),
    "lambda_scaling": Quota(1_000, "new execution environments per function every 10 s", "AWS Lambda scaling",
                            adjustable=False),
    "dynamodb_partition_rcu": Quota(3_000, "read units per second per partition", "Amazon DynamoDB partitions",
                                    adjustable=False),
    "dynamodb_partition_wcu": Quota(1_000, "write units per second per partition", "Amazon DynamoDB partitions",
                                    adjustable=False),
    "dynamodb_table_throughput": Quota(
        40_000, "read (and write) request units per second per on-demand table (account default)",
        "Amazon DynamoDB developer guide, maximum throughput for on-demand tables",
    ),
    "memory_event_source_concurrency": Quota(
        5, "concurrent memory-function invocations (template.yaml ScalingConfig.MaximumConcurrency)", "template.yaml"
    ),
    "apigw_stream_minutes": Quota(15, "minutes per streamed response (REST API, regional)", "API Gateway",
                                  adjustable=False),
    "elasticache_data_gb": Quota(5_000, "GB of data per serverless cache", "ElastiCache Serverless limits",
                                 verified=False),
    "elasticache_ecpu_per_s": Quota(15_000_000, "ECPU per second per serverless cache",
                                    "ElastiCache Serverless limits", verified=False),
    "apigw_account_rps": Quota(10_000, "requests per second per region (account throttle)",
                               "API Gateway quotas (commonly documented default)", verified=False),
}

LAMBDA_MB_PER_VCPU = 1_769
"""Lambda allocates CPU in proportion to memory: 1,769 MB is one full vCPU (AWS Lambda, "memory and computing
power")."""
INIT_LIMIT_S = 10.0
"""Lambda's INIT phase ends after 10 s (AWS Lambda execution environment lifecycle); longer init is repeated
inside the first invocation, billed."""
COLD_START_SHARE = 0.01
"""Share of invocations that start an execution environment: AWS's "under 1 %" of production invocations (the
INIT billing change announcement, 2025), used as 1 %."""
