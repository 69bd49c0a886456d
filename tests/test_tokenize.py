"""BM25 terms: English stems and stopwords, numbers, CJK bigrams; one function for documents and queries."""

from storage.index.tokenize import terms


def test_english_is_lowercased_stemmed_and_stopwords_dropped():
    assert terms("The Runners were RUNNING to the races") == ["runner", "run", "race"]
    assert terms("running") == terms("runs") == ["run"]


def test_numbers_are_kept():
    assert terms("Flight 714 on 2023-05-08 cost 3.5k") == ["flight", "714", "2023", "05", "08", "cost", "3", "5k"]


def test_possessives_and_contractions_keep_the_stem():
    assert terms("Caroline's dog") == terms("Caroline\u2019s dog") == ["carolin", "dog"]
    assert terms("I don't know, it's Mel's") == ["know", "mel"]


def test_chinese_runs_become_character_bigrams():
    assert terms("我喜欢北京烤鸭") == ["我喜", "喜欢", "欢北", "北京", "京烤", "烤鸭"]
    # a query word of two characters is one of the document's bigrams
    assert set(terms("北京")) <= set(terms("我喜欢北京烤鸭"))


def test_single_cjk_character_is_a_unigram_and_scripts_mix():
    assert terms("猫") == ["猫"]
    assert terms("Python 教程 and 日本語 한국어") == ["python", "教程", "日本", "本語", "한국", "국어"]


def test_punctuation_and_empty_text_give_no_terms():
    assert terms("") == []
    assert terms("... --- !!! the a of") == []


def test_accents_and_fullwidth_forms_fold():
    assert terms("Café naïve résumés") == terms("cafe naive resumes") == ["cafe", "naiv", "resum"]
    assert terms("ｆｕｌｌ width") == terms("full width")
