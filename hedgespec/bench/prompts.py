"""Built-in benchmark prompts, written for this project (prompt files are read by hedgespec.data.load_prompts)."""
SPEED_PROMPTS = [
    "Rewrite the following sentence in the past tense, then explain the change: 'The committee reviews "
    "every proposal carefully before it votes on the budget.'",
    "Here is a Python function:\n\ndef add_numbers(first, second):\n    total = first + second\n    return total\n\n"
    "Rename the function to sum_two and its arguments to a and b, and show the full function.",
    "Summarize the following text in two sentences: The city council met on Tuesday to discuss the new park. "
    "Residents asked for more trees, a playground and better lighting. The council agreed to fund the "
    "playground this year and the lighting next year.",
    "Write the SQL query that selects the name and email of every customer from the customers table whose "
    "city is 'Paris', ordered by name.",
    "What are the main causes of the seasons on Earth?",
    "List five common symptoms of dehydration.",
]
