"""What the user is told when a turn or an answer is stopped: per category, in the user's
language (`language.detect`), English where a language has no entry.

Self-harm gets a supportive answer with where to find help now, not a bare refusal: the
numbers are national crisis lines (verified for each country named) and findahelpline.com,
which lists lines for every country. The matched text is never echoed.
"""

# ruff: noqa: E501, RUF001  (sentences in other languages, with their own punctuation)

from __future__ import annotations

from moderation.language import DEFAULT

# The reply group each label belongs to, most serious first (the first group found wins).
GROUPS: tuple[tuple[str, frozenset[str]], ...] = (
    ("self_harm", frozenset({"self_harm"})),
    ("sexual_minors", frozenset({"sexual_minors"})),
    ("blacklisted_user", frozenset({"blacklisted_user"})),
    ("blacklisted_content", frozenset({"blacklisted_content"})),
    ("threats", frozenset({"threats"})),
    ("violence", frozenset({"violence", "violence_weapons", "weapons"})),
    ("drugs", frozenset({"drugs"})),
    ("malware", frozenset({"malware"})),
    ("secret_leak", frozenset({"secret_leak"})),
    ("privacy", frozenset({"privacy"})),
    ("sexual_image", frozenset({"sexual_image"})),
    ("sexual", frozenset({"sexual"})),
    ("hate", frozenset({"hate"})),
    ("abuse", frozenset({"abuse", "profanity"})),
    ("injection", frozenset({"injection", "jailbreak", "smuggling"})),
)

REPLIES: dict[str, dict[str, str]] = {
    "self_harm": {
        "en": "I'm really sorry you're going through this, and I can't help with anything that could hurt you. You don't have to face it alone: please talk to someone you trust, or call a crisis line now (US 988, UK and Ireland Samaritans 116 123; other countries: findahelpline.com). If you are in immediate danger, call your local emergency number.",
        "es": "Siento mucho que estés pasando por esto, y no puedo ayudar con nada que pueda hacerte daño. No tienes que enfrentarlo solo: habla con alguien de confianza o llama ahora a una línea de ayuda (España 024; otros países: findahelpline.com). Si estás en peligro inmediato, llama al número de emergencias.",
        "fr": "Je suis vraiment désolé que tu traverses cela, et je ne peux pas aider à quoi que ce soit qui pourrait te faire du mal. Tu n'es pas seul : parle à quelqu'un de confiance ou appelle une ligne d'écoute maintenant (France 3114 ; autres pays : findahelpline.com). En cas de danger immédiat, appelle le 112.",
        "de": "Es tut mir wirklich leid, dass es dir so geht, und ich kann bei nichts helfen, was dir schaden könnte. Du musst das nicht allein tragen: Sprich mit jemandem, dem du vertraust, oder ruf jetzt die TelefonSeelsorge an (0800 111 0 111, kostenlos, rund um die Uhr; andere Länder: findahelpline.com). In akuter Gefahr wähle 112.",
        "zh": "听到你正在经历这些，我真的很难过；我不能提供任何可能伤害你的帮助。你不必独自面对：请和你信任的人聊聊，或者现在就拨打心理援助热线（中国大陆 希望24热线 400-161-9995；其他地区：findahelpline.com）。如果你有即刻的危险，请拨打当地急救电话。",
        "ar": "يؤسفني حقًا أنك تمر بهذا، ولا أستطيع المساعدة في أي شيء قد يؤذيك. لست وحدك: تحدّث مع شخص تثق به، أو اتصل الآن بخط مساعدة نفسية في بلدك (تجد القائمة على findahelpline.com). إذا كنت في خطر فوري، فاتصل برقم الطوارئ المحلي.",
        "hi": "मुझे सच में दुख है कि आप इससे गुज़र रहे हैं, और मैं ऐसी किसी चीज़ में मदद नहीं कर सकता जिससे आपको नुकसान हो। आप अकेले नहीं हैं: किसी भरोसेमंद व्यक्ति से बात करें, या अभी हेल्पलाइन पर कॉल करें (भारत Tele-MANAS 14416; दूसरे देश: findahelpline.com)। तुरंत खतरा हो तो 112 पर कॉल करें।",
        "ru": "Мне очень жаль, что вам сейчас так тяжело, и я не могу помочь ни с чем, что может вам навредить. Вы не одни: поговорите с тем, кому доверяете, или позвоните на линию психологической помощи (список по странам: findahelpline.com). Если вы в непосредственной опасности, звоните 112.",
        "ja": "つらい思いをされていて、本当に心配です。あなたを傷つけるおそれのあることには協力できません。一人で抱え込まず、信頼できる人に話すか、いのちの電話（0570-783-556）などの相談窓口に連絡してください（他の国：findahelpline.com）。差し迫った危険があるときは119に電話してください。",
    },
    "sexual_minors": {
        "en": "I can't help with anything sexual involving minors.",
        "es": "No puedo ayudar con nada sexual que involucre a menores.",
        "fr": "Je ne peux pas aider avec quoi que ce soit de sexuel impliquant des mineurs.",
        "de": "Bei sexuellen Inhalten mit Minderjährigen helfe ich nicht.",
        "zh": "我不能提供任何涉及未成年人的性内容。",
        "ar": "لا يمكنني المساعدة في أي محتوى جنسي يتعلق بقاصرين.",
        "hi": "मैं नाबालिगों से जुड़ी किसी भी यौन सामग्री में मदद नहीं कर सकता।",
        "ru": "Я не помогаю ни с чем сексуальным, что касается несовершеннолетних.",
        "ja": "未成年者が関わる性的な内容には一切協力できません。",
    },
    "blacklisted_user": {
        "en": "This account can't send messages to the assistant right now.",
        "es": "Esta cuenta no puede enviar mensajes al asistente en este momento.",
        "fr": "Ce compte ne peut pas envoyer de messages à l'assistant pour le moment.",
        "de": "Dieses Konto kann dem Assistenten gerade keine Nachrichten senden.",
        "zh": "此账户目前无法向助手发送消息。",
        "ar": "لا يمكن لهذا الحساب إرسال رسائل إلى المساعد حاليًا.",
        "hi": "यह खाता अभी सहायक को संदेश नहीं भेज सकता।",
        "ru": "Этот аккаунт сейчас не может отправлять сообщения ассистенту.",
        "ja": "このアカウントは現在アシスタントにメッセージを送れません。",
    },
    "blacklisted_content": {
        "en": "This message has been blocked.",
        "es": "Este mensaje ha sido bloqueado.",
        "fr": "Ce message a été bloqué.",
        "de": "Diese Nachricht wurde blockiert.",
        "zh": "此消息已被拦截。",
        "ar": "تم حظر هذه الرسالة.",
        "hi": "यह संदेश रोक दिया गया है।",
        "ru": "Это сообщение заблокировано.",
        "ja": "このメッセージはブロックされました。",
    },
    "threats": {
        "en": "I can't help with threatening or intimidating someone. If you're in a conflict, I can help you put it calmly or find out how to get it resolved.",
        "es": "No puedo ayudar a amenazar ni intimidar a nadie. Si tienes un conflicto, puedo ayudarte a expresarlo con calma o a buscar cómo resolverlo.",
        "fr": "Je ne peux pas aider à menacer ou intimider quelqu'un. En cas de conflit, je peux t'aider à l'exprimer calmement ou à trouver comment le régler.",
        "de": "Beim Bedrohen oder Einschüchtern anderer helfe ich nicht. Bei einem Konflikt helfe ich dir gern, ihn ruhig anzusprechen oder eine Lösung zu finden.",
        "zh": "我不能帮助威胁或恐吓他人。如果你遇到了冲突，我可以帮你冷静地表达，或者找到解决的办法。",
        "ar": "لا يمكنني المساعدة في تهديد أحد أو ترهيبه. إن كان لديك خلاف، يمكنني مساعدتك في التعبير عنه بهدوء أو إيجاد طريقة لحله.",
        "hi": "मैं किसी को धमकाने या डराने में मदद नहीं कर सकता। अगर कोई झगड़ा है, तो मैं उसे शांति से कहने या सुलझाने में मदद कर सकता हूँ।",
        "ru": "Я не помогаю угрожать или запугивать. Если у вас конфликт, могу помочь спокойно изложить суть или найти способ его решить.",
        "ja": "誰かを脅したり威圧したりする手伝いはできません。もめごとがあるなら、落ち着いて伝える方法や解決策を一緒に考えます。",
    },
    "violence": {
        "en": "I can't help with hurting people or with making weapons or explosives.",
        "es": "No puedo ayudar a hacer daño a personas ni a fabricar armas o explosivos.",
        "fr": "Je ne peux pas aider à blesser des personnes ni à fabriquer des armes ou des explosifs.",
        "de": "Beim Verletzen von Menschen oder beim Bau von Waffen oder Sprengstoff helfe ich nicht.",
        "zh": "我不能帮助伤害他人，也不能帮助制造武器或爆炸物。",
        "ar": "لا يمكنني المساعدة في إيذاء الناس أو صنع الأسلحة أو المتفجرات.",
        "hi": "मैं लोगों को नुकसान पहुँचाने या हथियार या विस्फोटक बनाने में मदद नहीं कर सकता।",
        "ru": "Я не помогаю причинять вред людям или изготавливать оружие и взрывчатку.",
        "ja": "人を傷つけることや、武器・爆発物の製造には協力できません。",
    },
    "drugs": {
        "en": "I can't help with making, buying or selling illegal drugs. If you're worried about drug use, I can point you to support.",
        "es": "No puedo ayudar a fabricar, comprar o vender drogas ilegales. Si te preocupa el consumo, puedo indicarte dónde pedir apoyo.",
        "fr": "Je ne peux pas aider à fabriquer, acheter ou vendre des drogues illégales. Si la consommation t'inquiète, je peux t'indiquer où trouver de l'aide.",
        "de": "Bei Herstellung, Kauf oder Verkauf illegaler Drogen helfe ich nicht. Wenn dir Konsum Sorgen macht, nenne ich dir gern Hilfsangebote.",
        "zh": "我不能帮助制造、购买或贩卖毒品。如果你担心用药问题，我可以告诉你去哪里寻求帮助。",
        "ar": "لا يمكنني المساعدة في صنع المخدرات غير القانونية أو شرائها أو بيعها. إن كنت قلقًا بشأن التعاطي، يمكنني إرشادك إلى جهات الدعم.",
        "hi": "मैं अवैध नशीले पदार्थ बनाने, खरीदने या बेचने में मदद नहीं कर सकता। अगर नशे को लेकर चिंता है, तो मैं मदद के स्रोत बता सकता हूँ।",
        "ru": "Я не помогаю изготавливать, покупать или продавать запрещённые вещества. Если вас беспокоит употребление, подскажу, куда обратиться за помощью.",
        "ja": "違法薬物の製造・購入・販売には協力できません。薬物のことで心配があれば、相談先をお伝えできます。",
    },
    "malware": {
        "en": "I can't help with creating malicious software.",
        "es": "No puedo ayudar a crear software malicioso.",
        "fr": "Je ne peux pas aider à créer des logiciels malveillants.",
        "de": "Beim Erstellen von Schadsoftware helfe ich nicht.",
        "zh": "我不能帮助编写恶意软件。",
        "ar": "لا يمكنني المساعدة في إنشاء برمجيات خبيثة.",
        "hi": "मैं मैलवेयर बनाने में मदद नहीं कर सकता।",
        "ru": "Я не помогаю создавать вредоносные программы.",
        "ja": "マルウェアの作成には協力できません。",
    },
    "secret_leak": {
        "en": "The answer was stopped because it contained what looks like a secret key.",
        "es": "La respuesta se detuvo porque contenía algo que parece una clave secreta.",
        "fr": "La réponse a été interrompue car elle contenait ce qui ressemble à une clé secrète.",
        "de": "Die Antwort wurde gestoppt, weil sie etwas enthielt, das wie ein geheimer Schlüssel aussieht.",
        "zh": "回答已停止，因为其中包含疑似密钥的内容。",
        "ar": "تم إيقاف الإجابة لأنها احتوت على ما يبدو أنه مفتاح سري.",
        "hi": "जवाब रोक दिया गया क्योंकि उसमें कुछ ऐसा था जो गुप्त कुंजी जैसा दिखता है।",
        "ru": "Ответ остановлен: в нём было что-то похожее на секретный ключ.",
        "ja": "秘密鍵のようなものが含まれていたため、回答を停止しました。",
    },
    "privacy": {
        "en": "I can't help with finding, tracking or exposing someone's personal information. I'm happy to help you protect your own privacy.",
        "es": "No puedo ayudar a buscar, rastrear ni exponer datos personales de otra persona. Con gusto te ayudo a proteger tu propia privacidad.",
        "fr": "Je ne peux pas aider à trouver, suivre ou exposer les informations personnelles de quelqu'un. Je peux t'aider à protéger ta propre vie privée.",
        "de": "Beim Ausfindigmachen, Überwachen oder Bloßstellen persönlicher Daten anderer helfe ich nicht. Beim Schutz deiner eigenen Privatsphäre helfe ich gern.",
        "zh": "我不能帮助查找、追踪或曝光他人的个人信息。我很乐意帮你保护自己的隐私。",
        "ar": "لا يمكنني المساعدة في البحث عن المعلومات الشخصية لأحد أو تتبعها أو كشفها. يسعدني مساعدتك في حماية خصوصيتك.",
        "hi": "मैं किसी की निजी जानकारी ढूँढने, ट्रैक करने या उजागर करने में मदद नहीं कर सकता। अपनी निजता बचाने में ज़रूर मदद करूँगा।",
        "ru": "Я не помогаю искать, отслеживать или раскрывать чужие личные данные. С защитой вашей собственной приватности помогу с радостью.",
        "ja": "他人の個人情報を探したり、追跡したり、さらしたりする手伝いはできません。ご自身のプライバシーを守るお手伝いならできます。",
    },
    "sexual": {
        "en": "I can't write sexually explicit content.",
        "es": "No puedo escribir contenido sexual explícito.",
        "fr": "Je ne peux pas écrire de contenu sexuellement explicite.",
        "de": "Sexuell explizite Inhalte schreibe ich nicht.",
        "zh": "我不能创作露骨的色情内容。",
        "ar": "لا يمكنني كتابة محتوى جنسي صريح.",
        "hi": "मैं स्पष्ट यौन सामग्री नहीं लिख सकता।",
        "ru": "Я не пишу откровенный сексуальный контент.",
        "ja": "露骨な性的コンテンツは書けません。",
    },
    "hate": {
        "en": "I can't help with content that demeans people for who they are.",
        "es": "No puedo ayudar con contenido que denigre a las personas por lo que son.",
        "fr": "Je ne peux pas aider avec du contenu qui rabaisse des personnes pour ce qu'elles sont.",
        "de": "Bei Inhalten, die Menschen wegen ihrer Herkunft oder Identität herabwürdigen, helfe ich nicht.",
        "zh": "我不能帮助创作因身份而贬低他人的内容。",
        "ar": "لا يمكنني المساعدة في محتوى يحط من الناس بسبب هويتهم.",
        "hi": "मैं ऐसी सामग्री में मदद नहीं कर सकता जो लोगों को उनकी पहचान के कारण नीचा दिखाए।",
        "ru": "Я не помогаю с контентом, унижающим людей за то, кто они есть.",
        "ja": "属性を理由に人をおとしめる内容には協力できません。",
    },
    "abuse": {
        "en": "Let's keep this respectful; I'm happy to help with something else.",
        "es": "Mantengamos el respeto; con gusto te ayudo con otra cosa.",
        "fr": "Restons respectueux ; je peux t'aider avec autre chose.",
        "de": "Lass uns respektvoll bleiben; bei etwas anderem helfe ich gern.",
        "zh": "请保持尊重；我很乐意帮你做别的事情。",
        "ar": "لنحافظ على الاحترام؛ يسعدني مساعدتك في أمر آخر.",
        "hi": "आइए सम्मान बनाए रखें; मैं किसी और चीज़ में खुशी से मदद करूँगा।",
        "ru": "Давайте уважительно; с чем-то другим помогу с удовольствием.",
        "ja": "お互い敬意を持って話しましょう。ほかのことならお手伝いします。",
    },
    "injection": {
        "en": "This message looks like an attempt to override the assistant's instructions or safeguards, so it was not processed.",
        "es": "Este mensaje parece un intento de anular las instrucciones o protecciones del asistente, así que no se procesó.",
        "fr": "Ce message ressemble à une tentative de contourner les instructions ou protections de l'assistant ; il n'a pas été traité.",
        "de": "Diese Nachricht sieht nach einem Versuch aus, die Anweisungen oder Schutzmechanismen des Assistenten auszuhebeln; sie wurde nicht verarbeitet.",
        "zh": "这条消息看起来是在试图绕过助手的指令或安全措施，因此未被处理。",
        "ar": "تبدو هذه الرسالة محاولة لتجاوز تعليمات المساعد أو ضوابطه، لذلك لم تتم معالجتها.",
        "hi": "यह संदेश सहायक के निर्देशों या सुरक्षा उपायों को बायपास करने की कोशिश जैसा लगता है, इसलिए इसे प्रोसेस नहीं किया गया।",
        "ru": "Это сообщение похоже на попытку обойти инструкции или защиту ассистента, поэтому оно не обработано.",
        "ja": "このメッセージはアシスタントの指示や安全対策を回避しようとしているように見えるため、処理しませんでした。",
    },
    "sexual_image": {
        "en": "I can't look at or work with sexually explicit images, so this one was not passed on.",
        "es": "No puedo ver ni trabajar con imágenes sexualmente explícitas, así que esta no se ha procesado.",
        "fr": "Je ne peux pas regarder ni traiter d'images sexuellement explicites ; celle-ci n'a donc pas été transmise.",
        "de": "Sexuell explizite Bilder kann ich mir nicht ansehen oder bearbeiten; dieses wurde deshalb nicht weitergegeben.",
        "zh": "我不能查看或处理露骨的色情图片，因此这张图片没有被处理。",
        "ar": "لا يمكنني عرض الصور الجنسية الصريحة أو التعامل معها، لذلك لم تتم معالجة هذه الصورة.",
        "hi": "मैं यौन रूप से स्पष्ट तस्वीरें न देख सकता हूँ न उन पर काम कर सकता हूँ, इसलिए यह तस्वीर आगे नहीं भेजी गई।",
        "ru": "Я не могу просматривать откровенные сексуальные изображения или работать с ними, поэтому это изображение не обработано.",
        "ja": "性的に露骨な画像は閲覧も処理もできないため、この画像は処理しませんでした。",
    },
    "default": {
        "en": "This content was blocked by the safety checks.",
        "es": "Este contenido fue bloqueado por los controles de seguridad.",
        "fr": "Ce contenu a été bloqué par les contrôles de sécurité.",
        "de": "Dieser Inhalt wurde von den Sicherheitsprüfungen blockiert.",
        "zh": "该内容已被安全检查拦截。",
        "ar": "تم حظر هذا المحتوى بواسطة فحوصات الأمان.",
        "hi": "यह सामग्री सुरक्षा जाँच द्वारा रोक दी गई।",
        "ru": "Этот контент заблокирован проверками безопасности.",
        "ja": "このコンテンツは安全チェックによりブロックされました。",
    },
}


def group_of(labels: tuple[str, ...]) -> str | None:
    """The reply group for the labels that stopped a text (None when none did)."""
    if not labels:
        return None
    for group, members in GROUPS:
        if members & set(labels):
            return group
    return "default"


def reply(labels: tuple[str, ...], lang: str = DEFAULT) -> str:
    """The sentence for the user, in `lang` when there is one ("" when nothing stopped)."""
    group = group_of(labels)
    if group is None:
        return ""
    texts = REPLIES[group]
    return texts.get(lang) or texts[DEFAULT]
