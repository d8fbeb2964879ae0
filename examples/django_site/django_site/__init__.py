"""failopen's example Django site: a log-in form protected by FailOpenMiddleware."""
