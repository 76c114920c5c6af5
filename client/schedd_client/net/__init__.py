"""Outbound network access: the policy of what the cluster may reach (pure) and the connections that obey it.

Here, in the client distribution, because both sides use it and share nothing else below the
wire: the daemon's leader (SLA webhooks) and the worker (HTTP jobs, http sensors). Stdlib only."""
