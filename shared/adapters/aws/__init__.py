"""AWS adapters: the only package of ``shared`` allowed to import boto3."""
