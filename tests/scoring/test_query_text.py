"""A question's instructions about its answer's form are not searched; the question is."""

from __future__ import annotations

import pytest

from ragspine.scoring.query_text import search_text, split_instructions


@pytest.mark.parametrize(
    ("query", "searched", "left_out"),
    [
        ("How many items are in the Amazon datasets? Please write the answer in int format.",
         "How many items are in the Amazon datasets?", ["Please write the answer in int format."]),
        ("Which Exhibits are not mentioned? The answer should be formatted as a list, for example [\"P-1\",\"P-2\"]",
         "Which Exhibits are not mentioned?", ["The answer should be formatted as a list, for example [\"P-1\",\"P-2\"]"]),
        ("Is market CA03 part of the Bay Area? Answer 'yes' or 'no'.",
         "Is market CA03 part of the Bay Area?", ["Answer 'yes' or 'no'."]),
        ("Is there a signature on the last page? Directly answer 'yes' or 'no'.",
         "Is there a signature on the last page?", ["Directly answer 'yes' or 'no'."]),
        ("What is the residential capacity of Staten Island? Give me an integer.",
         "What is the residential capacity of Staten Island?", ["Give me an integer."]),
        ("Which operators are not in common? Please list the names in list format, e.g., [\"a\",\"b\"] ",
         "Which operators are not in common?", ["Please list the names in list format, e.g., [\"a\",\"b\"]"]),
        # the example list trailing the question itself
        ("Which seniors go online, e.g., [\"9%\",\"8%\"]", "Which seniors go online", ["e.g., [\"9%\",\"8%\"]"]),
        ("2019年营业收入是多少？请以整数形式作答。", "2019年营业收入是多少？", ["请以整数形式作答。"]),
        ("2019年营业收入是多少?请以整数形式作答。", "2019年营业收入是多少?", ["请以整数形式作答。"]),  # half-width "?"
        ("How much? Round your answer to three decimal places.", "How much?",
         ["Round your answer to three decimal places."]),
        # what an instruction says after its example list is the question's own
        ("Which seniors own a tablet? Please write the answer in list format, e.g., [\"9%\",\"8%\"] in the 2013 "
         "tracking survey?", "Which seniors own a tablet? in the 2013 tracking survey?",
         ["Please write the answer in list format, e.g., [\"9%\",\"8%\"]"]),
        ("List all countries in the compliance part (except the U.S.). Your answer should be in English.",
         "List all countries in the compliance part (except the U.S.).", ["Your answer should be in English."]),
        # a question mark written straight against the next sentence still ends the question
        ("What is the FY2015 EBITDA margin for Netflix?Answer in percentage term, round to one decimal place.",
         "What is the FY2015 EBITDA margin for Netflix?", ["Answer in percentage term, round to one decimal place."]),
        ("What is Amazon's DPO?Round your answer to two decimal places.", "What is Amazon's DPO?",
         ["Round your answer to two decimal places."]),
        # an example list after "like", in square brackets, closing its sentence
        ("Which years does the diagram discuss? List all of them like ['2014', '2018'].",
         "Which years does the diagram discuss? List all of them", ["like ['2014', '2018']."]),
    ],
)
def test_instructions_about_the_answer_are_left_out(query: str, searched: str, left_out: list[str]) -> None:
    assert split_instructions(query) == (searched, left_out)
    assert search_text(query) == searched


@pytest.mark.parametrize(
    "query",
    [
        # the first sentence is the question, whatever verb it starts with
        "List all the countries mentioned in the Regulatory Compliance part of this guidebook.",
        "Please list the subsidiaries of Acme Holdings in 2023.",
        # a hint about where to look names no form of answer
        "What is the FY2018 capital expenditure amount (in USD millions) for 3M? Use the cash flow statement.",
        "What was revenue in 2019? Compare it with the segment table.",
        # a unit is what the tables say too ("in millions")
        "What is Netflix's advertising expense in FY2015? Answer in millions.",
        "营业收入是多少？请以百万元为单位作答。",
        # an instruction alone is the question: nothing else would be left
        "Please write the answer in int format.",
        # "!" or "?" inside a name, or before a lower-case word, ends no sentence
        "Is Yahoo!Japan in the list of subsidiaries?",
        "Which figure?the first one",
        # "like" before words or parentheses is the question's own
        "What does the logo look like (colour and shape)?",
        "Which segments look like growth segments? Answer like an analyst would.",
        # an abbreviation's full stop ends no sentence
        "How much cash did Apple Inc. return to shareholders as a percentage of free cash flow?",
        "What was U.S. revenue? No. 3 segment grew.",
        # an example inside the question, not closing it
        'Which risk factors, such as "supply chain disruption", did Apple list in 2022?',
        "Which segments, e.g. [cloud, devices], grew in 2023 and by how much?",
        # an answer verb without a form is a question
        "What were the segments? List the segments in order of revenue.",
        "What about China? Give the percentage of net sales from Greater China.",
        "What is the backlog? Order backlog in number of units for 2023.",
        "What is the lease liability? Present value of lease payments as a percentage of assets.",
        "What was capex in 2018? Answer using the cash flow statement.",
        # a Chinese instruction that asks for more than a form, and a hint
        "持股情况如何？请用列表形式列出，并说明持股比例。",
        "现金流如何？请根据现金流量表回答。",
        "2019年营业收入是多少？",
        "revenue growth U.S. e.g. margin",  # "e.g." with no example list after it
        "",
    ],
)
def test_questions_and_hints_stay_as_asked(query: str) -> None:
    assert split_instructions(query) == (query, [])


def test_a_long_run_of_spaces_costs_no_more_than_a_short_query() -> None:
    # The example pattern once began with white space and searched a 4,096-character query of
    # spaces in 0.3 s (quadratic); it now starts at its keyword. Compared, not timed: the count
    # of regex steps is what grows, so the long query must be answered unchanged and the
    # patterns must not begin with a repeated white-space class.
    from ragspine.scoring import query_text

    query = "a" + " " * 4094 + "b"
    assert split_instructions(query) == (query, [])
    for pattern in (query_text._EXAMPLE, query_text._LIST_END):
        assert not pattern.pattern.startswith(("\\s", "[,;"))
