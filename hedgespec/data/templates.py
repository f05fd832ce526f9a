"""Instruction phrasings of each kind of request, and the rewording used for the distribution-shift
set.

The eval set always uses the first phrasing of a family; ``eval_reworded.jsonl`` asks the same
thing with another phrasing of the same family, picked by a seed. Only the instruction changes:
the material (code, passage, question) and the reference answer stay identical. Material always
follows the instruction after a blank line, which the leakage check relies on (it looks at
paragraphs).
"""
import random
from dataclasses import dataclass, field

PHRASINGS = {
    # python
    "complete_python": (
        "Complete the following Python function.\n\n```python\n{code}```",
        "Finish writing this Python function so that it does what its docstring says:\n\n```python\n{code}```",
        "Here is the beginning of a Python function. Write the rest of it.\n\n```python\n{code}```",
    ),
    "write_python": (
        "Write a Python function with the signature `{signature}`.\n\nIt should do the following: {summary}",
        "Implement `{signature}` in Python.\n\nWhat it must do: {summary}",
        "I need a Python function `{signature}`.\n\nSpecification: {summary}",
    ),
    "refactor_python": (
        "Refactor the following Python function for readability without changing its behaviour.\n\n"
        "```python\n{code}\n```",
        "Clean up this Python code, keeping exactly the same behaviour.\n\n```python\n{code}\n```",
        "Rewrite the function below so that it is easier to read; it must still behave the same.\n\n"
        "```python\n{code}\n```",
    ),
    # sql
    "explain_sql_command": (
        "In PostgreSQL, what does the {command} command do? Show a short example.",
        "Explain the purpose of the PostgreSQL {command} statement and give an example of its use.",
        "What is {command} used for in PostgreSQL? Include a small example.",
    ),
    "complete_sql": (
        "Complete the following SQL query ({name}).\n\n```sql\n{prefix}\n```",
        "Here is the start of an SQL query ({name}). Write the remainder.\n\n```sql\n{prefix}\n```",
        "Finish this SQL query ({name}):\n\n```sql\n{prefix}\n```",
    ),
    "explain_sql_query": (
        "Explain step by step what this SQL query computes.\n\n```sql\n{query}\n```",
        "Describe in plain words what the following SQL query returns.\n\n```sql\n{query}\n```",
        "Walk me through this SQL query clause by clause.\n\n```sql\n{query}\n```",
    ),
    "rewrite_sql": (
        "Rewrite this SQL query so that it is easier to read, keeping its result the same.\n\n"
        "```sql\n{query}\n```",
        "Reformat and simplify the following SQL query without changing what it returns.\n\n```sql\n{query}\n```",
        "Make this SQL query more readable; the output must not change.\n\n```sql\n{query}\n```",
    ),
    # math
    "solve_math": (
        "Solve this problem and give the final answer.\n\n{question}",
        "Work out the answer to the following.\n\n{question}",
        "Please answer this maths question.\n\n{question}",
    ),
    "check_math": (
        "A student gave the answer below. Check it by working through the problem again.\n\n"
        "Problem: {question}\n\nStudent's answer: {answer}",
        "Verify the proposed answer by solving the problem yourself.\n\nProblem: {question}\n\n"
        "Proposed answer: {answer}",
        "Is this answer right? Redo the calculation to check.\n\nProblem: {question}\n\nAnswer given: {answer}",
    ),
    # biology
    "define_go": (
        "What is meant by the Gene Ontology term \"{term}\"?",
        "Define the biological term \"{term}\" as the Gene Ontology uses it.",
        "In the Gene Ontology, what does \"{term}\" refer to?",
    ),
    "simplify_go": (
        "Rewrite this Gene Ontology definition in plain language for a student.\n\n{term}: {definition}",
        "Explain the following definition in simpler words.\n\n{term}: {definition}",
        "Put this definition into everyday language, keeping its meaning.\n\n{term}: {definition}",
    ),
    "summarise_bio": (
        "Summarise the following passage from the Biopython tutorial.\n\n{passage}",
        "Give a short summary of this excerpt from the Biopython documentation.\n\n{passage}",
        "What are the main points of the passage below?\n\n{passage}",
    ),
    # chemistry
    "element_uses": (
        "What are the main uses of {element}, and how is it obtained?",
        "How is the element {element} produced, and what is it used for?",
        "Describe where {element} comes from and what it is used for.",
    ),
    "catalysis": (
        "Which chemical reaction is catalysed by {term}?",
        "Write out the reaction that {term} catalyses.",
        "What reaction does an enzyme with {term} carry out?",
    ),
    "summarise_element": (
        "Summarise this description of {element} in two sentences.\n\n{description}",
        "Condense the following text about {element} into a short summary.\n\n{description}",
        "Give the key facts from this description of {element}.\n\n{description}",
    ),
    "explain_reaction": (
        "Explain the following biochemical reaction in words, naming each reactant and product.\n\n{reaction}",
        "Describe in words what happens in this reaction, listing reactants and products.\n\n{reaction}",
        "Read this reaction equation and explain it step by step.\n\n{reaction}",
    ),
    # medical
    "disease_features": (
        "What are the typical clinical features of {disease}?",
        "Which signs and symptoms are characteristic of {disease}?",
        "List the main clinical findings in {disease}.",
    ),
    "define_hpo": (
        "What does the clinical term \"{term}\" mean?",
        "Define the medical phenotype \"{term}\".",
        "Explain what is meant by \"{term}\" in a clinical description.",
    ),
    "explain_hpo": (
        "Rewrite this clinical definition in plain language for a patient.\n\n{term}: {definition}",
        "Explain the following medical definition so that a non-specialist understands it.\n\n"
        "{term}: {definition}",
        "Translate this definition into everyday words.\n\n{term}: {definition}",
    ),
    "clinical_summary": (
        "Write a short clinical summary of a patient with {disease} from these findings.\n\n{findings}",
        "Using only the findings below, write a brief case summary for {disease}.\n\n{findings}",
        "Turn these findings into a short paragraph describing a patient with {disease}.\n\n{findings}",
    ),
    # news
    "summarise_news": (
        "Summarize the following article.\n\n{article}",
        "Give a brief summary of this news story.\n\n{article}",
        "What is this article about? Summarise it in a few sentences.\n\n{article}",
    ),
    "headline": (
        "Write a headline for this news article.\n\n{article}",
        "Suggest a short title for the following news story.\n\n{article}",
        "What would be a good headline for this article?\n\n{article}",
    ),
    "report": (
        "Write a short news report for the headline: {headline}",
        "Draft a brief news article to go with this headline: {headline}",
        "Here is a headline: {headline}. Write the news story.",
    ),
}


@dataclass
class Ask:
    """One evaluation request before it is worded: a phrasing family and the material."""
    kind: str  # "question" (answer from knowledge) or "copy" (reuse or edit given material)
    family: str
    fields: dict = field(default_factory=dict)
    reference: str | None = None


def render(ask: Ask, variant: int = 0) -> str:
    return PHRASINGS[ask.family][variant].format(**ask.fields)


def reworded(ask: Ask, seed: int, key: str) -> str:
    """Another phrasing than the eval set's, the same for the same seed and key."""
    variant = random.Random(f"{seed}/{key}").randrange(1, len(PHRASINGS[ask.family]))
    return render(ask, variant)
