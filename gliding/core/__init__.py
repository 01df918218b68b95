"""Pure values: ids, IRIs, chat messages, token and cost budgets, the clock protocol."""
