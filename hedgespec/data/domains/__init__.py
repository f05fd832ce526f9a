"""One module per corpus. Each has SOURCES (names in sources.SOURCES) and
documents(src) -> (source label, text) pairs; the seven evaluation domains also have
asks(src, rng) -> the requests their prompts are worded from."""
from . import biology, chemistry, general, mathematics, medical, news, python, sql

DOMAINS = ("python", "sql", "math", "biology", "chemistry", "medical", "news")
MODULES = {"python": python, "sql": sql, "math": mathematics, "biology": biology, "chemistry": chemistry,
           "medical": medical, "news": news, "general": general}
