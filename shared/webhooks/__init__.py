"""Signed webhooks when a run ends (docs/deployment.md, "Webhooks"): what is sent, how it is signed, how it is
delivered. Delivery runs off the run path, in the webhook function (``functions/webhook_delivery``)."""
