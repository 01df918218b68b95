"""The LLM port and its backends: litellm (hosted), local llama.cpp, and ``gliding.testing``'s
scripted model. SDK imports live only in the provider modules and happen lazily."""
