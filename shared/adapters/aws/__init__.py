"""AWS adapters. The only package (with ``shared.local``) allowed to import boto3."""
